from django.urls import path

from . import views

urlpatterns = [
    path("orders/", views.place_order),
    path("orders/<int:order_id>/", views.order_page),
    path("ping/", views.async_ping),
]
